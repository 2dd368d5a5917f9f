"""One worker's crawl of one task: pick the source, the account's HTTP session, fetch, (re-)login, crawl.

A ``TaskRunner`` belongs to ONE worker thread: it owns that worker's HTTP sessions (one per account,
see ``crawler_client.transport.SessionCache``), so no session is ever shared between threads.

Form login (sources whose spec says ``login="form"``, i.e. ECSHOP's ``user.php``): when a page turns out to be
a login wall, the runner logs in once with the account blob's ``username``/``password`` (or the settings
``sources.<name>.username/password``) and fetches the page again; a second wall, a failed login or no
credentials ends the crawl as ``LoginRequired``. The session keeps the login cookie for later tasks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from crawler_client.crawl import CrawlResult, crawl_task, error_report, failure_report
from crawler_client.headers import source_headers
from crawler_client.http import Fetcher, FetchPolicy
from crawler_client.observer import ClientObserver
from crawler_client.observer import current as current_observer
from crawler_client.sources import SOURCES, get_source, registry, source_options
from crawler_client.sources.base import FormLogin, Source
from crawler_client.transport import HttpSession, SessionCache, Urllib3Transport
from icecrawler.clock import Clock
from icecrawler.cookie_blob import AccountBlob, format_cookie_blob, parse_cookie_blob
from icecrawler.errors import FetchError
from icecrawler.logs import LogThrottle
from icecrawler.models import Outcome, Task, account_cookies_fit, is_visitor
from icecrawler.settings import Settings

__all__ = ["RunnerConfig", "TaskRunner", "form_logins"]

log = logging.getLogger(__name__)
#: A refresh too big for a report recurs at every crawl of that account and source: one line a minute says so.
_UNFIT_REFRESHES = LogThrottle()


def form_logins() -> dict[str, FormLogin]:
    """Sources with a member login (spec ``login="form"``), by name: each brings its ``form_login``."""
    # getattr: ``form_login`` is declared by form-login sources only, not by the DeclaredSource protocol.
    return {
        name: getattr(SOURCES[name], "form_login")  # noqa: B009
        for name, spec in registry.items()
        if spec.login == "form"
    }


@dataclass(frozen=True)
class RunnerConfig:
    """What a runner reads from the settings: fetch limits, the page cap, where each source lives, the headers
    each sends (``crawler_client.headers``), its other ``sources.<name>.*`` options, and the form-login
    credentials of the sources that have one (an account blob's own credentials win)."""

    policy: FetchPolicy
    max_pages: int
    base_urls: Mapping[str, str]
    credentials: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    headers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> RunnerConfig:
        """Bad header or source settings fail here, at start-up (ConfigError)."""
        options = {name: source_options(settings, name) for name in SOURCES}
        for name in SOURCES:
            get_source(name, options[name])  # validates the options (e.g. sources.jd.endpoint)
        return cls(
            policy=FetchPolicy.from_settings(settings),
            max_pages=settings.get_int("client.max_pages"),
            base_urls={name: settings.get_str(f"sources.{name}.base_url") for name in SOURCES},
            credentials={
                name: (settings.get_str(f"sources.{name}.username"), settings.get_str(f"sources.{name}.password"))
                for name in form_logins()
            },
            headers={
                name: source_headers(
                    get_source(name).default_headers,
                    settings.get_str("client.user_agent"),
                    settings.get_str(f"sources.{name}.headers"),
                    f"sources.{name}.headers",
                )
                for name in SOURCES
            },
            options=options,
        )

    def make_source(self, name: str) -> Source:
        """A fresh source ``name`` with its options (what the client passes to ``TaskRunner``)."""
        return get_source(name, self.options.get(name))


def _refreshed_blob(task: Task, session: HttpSession, base_url: str) -> str:
    """The leased account's blob with the login cookies the site refreshed during the crawl (``Set-Cookie`` with an
    expiry, ``BoundedCookieJar.refreshed``), for the report to carry to the scheduler; "" when nothing changed, for a
    visitor session (renewed by the scheduler's mint) and for a source leased without an account."""
    account = task.account
    if not account.id or is_visitor(account.id) or not account.cookie_blob:
        return ""
    blob = parse_cookie_blob(account.cookie_blob)
    fresh = session.cookies.refreshed(blob.cookies, base_url)
    if fresh == blob.cookies:
        return ""
    text = format_cookie_blob(AccountBlob(fresh, blob.username, blob.password))
    if not account_cookies_fit(text):  # the scheduler would refuse the whole report for it
        admitted = _UNFIT_REFRESHES.admit((task.source, account.id))
        if admitted is not None:
            log.warning(
                "account %s: the cookies %s set do not fit a report; not passed on%s",
                account.id,
                task.source,
                LogThrottle.more(admitted, "such crawls"),
            )
        return ""
    return text


class TaskRunner:
    """Crawls tasks for one worker thread."""

    def __init__(
        self,
        config: RunnerConfig,
        get_source: Callable[[str], Source],
        *,
        clock: Clock,
        cancel: threading.Event,
    ) -> None:
        self.config = config
        self._get_source = get_source
        self.clock = clock
        self.cancel = cancel
        self.sessions = SessionCache(proxy_url=config.policy.proxy_url)

    def close(self) -> None:
        self.sessions.close()

    def run(self, task: Task) -> CrawlResult:
        """Crawl ``task``; every failure comes back as a classified CrawlResult, never as an exception."""
        try:
            source = self._get_source(task.source)
            base_url = self.config.base_urls[task.source]
            session = self.sessions.session(task.source, task.account, base_url)
        except FetchError as exc:
            return CrawlResult(task, error_report(task, exc, 0))
        except (KeyError, ValueError) as exc:  # unknown source name (ConfigError is a ValueError) / no base URL
            log.error("task %s: cannot crawl source %r: %s", task.id, task.source, exc)
            return CrawlResult(task, failure_report(task, Outcome.ParseError, "unknown-source"))
        observer = current_observer()
        fetcher = Fetcher(
            Urllib3Transport(session),
            self.config.policy,
            sleep=self._retry_wait(observer),
            headers=self.config.headers.get(task.source),
            on_response=lambda status, size, seconds: observer.fetched(task.source, status, size, seconds),
        )
        relogin = self._relogin_hook(task, base_url, fetcher)
        result = crawl_task(
            task,
            source,
            fetcher,
            base_url=base_url,
            max_pages=self.config.max_pages,
            now_ms=self.clock.now_ms,
            cancelled=self._cancelled(task),
            relogin=relogin,
            on_parse=lambda seconds, items: observer.parsed(task.source, seconds, items),
        )
        result.report.account_cookies = _refreshed_blob(task, session, base_url)
        return result

    def _retry_wait(self, observer: ClientObserver) -> Callable[[float], object]:
        def wait(seconds: float) -> bool:
            observer.waited("fetch_retry", seconds)
            return self.cancel.wait(seconds)

        return wait

    def _cancelled(self, task: Task) -> Callable[[], bool]:
        def cancelled() -> bool:
            # Lease deadlines are wall-clock ms (the scheduler's simulated clock only drives due times).
            return self.cancel.is_set() or bool(task.lease_deadline_ms and time.time() * 1000 > task.lease_deadline_ms)

        return cancelled

    def _credentials(self, task: Task) -> tuple[str, str]:
        blob = parse_cookie_blob(task.account.cookie_blob)
        if blob.username:
            return blob.username, blob.password
        return self.config.credentials.get(task.source, ("", ""))

    def _relogin_hook(self, task: Task, base_url: str, fetcher: Fetcher) -> Callable[[], None] | None:
        form = form_logins().get(task.source)
        if form is None:
            return None

        def relogin() -> None:
            username, password = self._credentials(task)
            if not username:
                raise FetchError(
                    f"{task.source}: login wall and no credentials (set sources.{task.source}."
                    "username/password or put them in the account blob)",
                    outcome=Outcome.LoginRequired,
                    error_class="no-credentials",
                )
            log.info("task %s: login wall, logging in as %s", task.id, username)
            current_observer().session_renewed(task.source)
            answer = fetcher.fetch(form.request(base_url, username, password))
            if not form.succeeded(answer):
                raise FetchError(
                    f"{task.source}: login as {username} failed (HTTP {answer.status})",
                    outcome=Outcome.LoginRequired,
                    http_status=answer.status,
                    error_class="login-failed",
                )

        return relogin
