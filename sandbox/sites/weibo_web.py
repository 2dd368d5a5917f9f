"""weibo.com's JSON API under ``/web``, as its web client calls it since 2021: ``/ajax/statuses/mymblog``
(a user's timeline, ``page`` and ``since_id``), ``/ajax/statuses/longtext`` and ``/ajax/profile/info``.

Sessions, as on the real site: the API needs a ``SUB`` cookie. A request without one is redirected to the
passport's visitor page; a visitor ``SUB`` the passport minted works until it expires, then the API answers
HTTP 432; any other ``SUB`` is a logged-in account. The first answer sets an ``XSRF-TOKEN`` cookie, and once a
client holds it every API call must echo it in ``X-XSRF-TOKEN`` (403 otherwise).

Paging: 20 posts a page, the pinned post on top of page 1 (``isTop``, ``mblogtype`` 2, title "置顶"). Users whose
``cursor`` is "since_id" get ``data.since_id`` (``{mid}kp{page}``, opaque to clients; "" on the last page); the
others get ``since_id: ""`` on every page, as saved weibo.com answers of 2022-2023 show with many pages still to
come, and are paged by ``page``. Past the end the answer is ``{"ok":1}`` (no data).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from sandbox.content import SimPost
from sandbox.scenario import WeiboUser
from sandbox.sites import SiteContext
from sandbox.sites.passport import VISITOR_PAGE_PATH, VisitorRegistry
from sandbox.sites.weibo import LONG_TEXT_CUT, WeiboMarkup, rfc2822_beijing, text_html, topic_query
from sandbox.web import SimRequest, SimResponse
from sandbox.world import World

__all__ = ["PAGE_SIZE", "WeiboWebSite", "make_site", "mblog_json", "mymblog_body", "user_json"]

PAGE_SIZE = 20

MARKUP = WeiboMarkup(
    topic=lambda t: f'<a href="//s.weibo.com/weibo?q={topic_query(t)}" target="_blank">{t}</a>',
    emoji=lambda e: (
        f'<img alt="{e}" title="{e}" src="https://face.t.sinajs.cn/t4/appstyle/expression/ext/normal/'
        f'a1/2018new_doge02_org.png" />'
    ),
    more=lambda p: ' ...<span class="expand">展开</span>',
)


def _pic_info(pid: str) -> dict[str, Any]:
    def size(path: str, width: int, height: int) -> dict[str, Any]:
        return {
            "url": f"https://wx1.sinaimg.cn/{path}/{pid}.jpg",
            "width": width,
            "height": height,
            "cut_type": 1,
            "type": None,
        }

    return {
        "thumbnail": size("wap180", 135, 180),
        "bmiddle": size("wap360", 270, 360),
        "large": size("orj960", 720, 960),
        "original": size("orj1080", 1080, 1440),
        "largest": size("large", 1080, 1440),
        "mw2000": size("mw2000", 1080, 1440),
        "object_id": f"1042018:{pid[:16]}",
        "pic_id": pid,
        "photo_tag": 0,
        "type": "pic",
        "pic_status": 1,
    }


class WeiboWebSite:
    prefix: ClassVar[str] = "web"

    def __init__(self, world: World, visitors: VisitorRegistry) -> None:
        self.world = world
        self.visitors = visitors

    def target_of(self, request: SimRequest) -> str:
        uid = request.query.get("uid", "")
        return uid if uid.isdigit() else ""

    def logged_in(self, request: SimRequest) -> bool:
        return self.visitors.state(request.cookies.get("SUB", ""), request.now_ms) == "account"

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        """A logged-out API call gets the login page (HTML), which clients must take for an expired session."""
        return SimResponse.html(
            "<!DOCTYPE html><html><head><title>微博-随时随地发现新鲜事</title></head><body>"
            '<div class="LoginCard">登录 <a href="https://passport.weibo.com/sso/signin">'
            "请先登录</a></div></body></html>"
        )

    def handle(self, request: SimRequest) -> SimResponse:
        refused = self._session_check(request)
        if refused is not None:
            return refused
        if request.path == "/ajax/statuses/mymblog":
            response = self._mymblog(request)
        elif request.path == "/ajax/statuses/longtext":
            response = self._longtext(request)
        elif request.path == "/ajax/profile/info":
            response = self._profile(request)
        else:
            return SimResponse.not_found()
        if not request.cookies.get("XSRF-TOKEN"):
            response.headers["Set-Cookie"] = f"XSRF-TOKEN={secrets.token_urlsafe(18)}; path=/"
        return response

    # --- sessions ---------------------------------------------------------------------------------------
    def _session_check(self, request: SimRequest) -> SimResponse | None:
        state = self.visitors.state(request.cookies.get("SUB", ""), request.now_ms)
        if state == "none":
            host = request.headers.get("Host", "127.0.0.1")
            back = quote(f"http://{host}/web{request.path}", safe="")
            return SimResponse.redirect(
                f"http://{host}/passport{VISITOR_PAGE_PATH}?entry=miniblog&a=enter&url={back}&domain=weibo.com"
            )
        if state == "expired":
            return SimResponse(432, b"", "text/html; charset=utf-8")
        token = request.cookies.get("XSRF-TOKEN", "")
        if token and request.headers.get("X-XSRF-TOKEN", "") != token:
            return SimResponse(403, b'{"ok":0,"msg":"xsrf token mismatch"}', "application/json; charset=utf-8")
        return None

    # --- endpoints --------------------------------------------------------------------------------------
    def _user(self, uid_text: str) -> WeiboUser | None:
        if not uid_text.isdigit():
            return None
        user = self.world.user(int(uid_text))
        return user if user is not None and "web" in user.sites else None

    def _mymblog(self, request: SimRequest) -> SimResponse:
        user = self._user(request.query.get("uid", ""))
        if user is None:
            return SimResponse.json({"ok": 0, "msg": "用户不存在", "data": {}})
        posts = self.world.timeline(user.uid, request.now_ms) or []
        pinned = [p for p in posts if p.pinned]
        dated = [p for p in posts if not p.pinned]
        page = max(1, request.int_param("page", 1))
        since = request.query.get("since_id", "").partition("kp")[0]
        if since.isdigit():
            start = next((i for i, p in enumerate(dated) if p.mid <= int(since)), len(dated))
        else:
            start = (page - 1) * PAGE_SIZE
        chunk = dated[start : start + PAGE_SIZE]
        if not chunk:
            return SimResponse.json({"ok": 1})
        shown = (pinned if start == 0 else []) + chunk
        since_id = ""  # page-cursor users: an empty since_id on every page, the next one asked for by number
        if user.cursor == "since_id":
            following = start + PAGE_SIZE
            since_id = f"{dated[following].mid}kp{page + 1}" if following < len(dated) else ""
        return SimResponse(
            200, mymblog_body(shown, total=len(posts), since_id=since_id), "application/json; charset=utf-8"
        )

    def _longtext(self, request: SimRequest) -> SimResponse:
        key = request.query.get("id", "")
        post = self.world.post_by_bid(key, request.now_ms) if key else None
        if post is None and key.isdigit():
            post = self.world.post(int(key), request.now_ms)
        if post is None:
            return SimResponse.json({"ok": 1, "http_code": 200, "data": {}})
        return SimResponse.json(
            {
                "ok": 1,
                "http_code": 200,
                "data": {
                    "longTextContent": post.text + (f" {post.emoji}" if post.emoji else ""),
                    "url_struct": [],
                    "topic_struct": [{"topic_title": post.topic.strip("#")}] if post.topic else [],
                },
            }
        )

    def _profile(self, request: SimRequest) -> SimResponse:
        user = self._user(request.query.get("uid", ""))
        if user is None:
            return SimResponse.json({"ok": 0, "msg": "用户不存在"})
        posts = self.world.timeline(user.uid, request.now_ms) or []
        return SimResponse.json({"ok": 1, "data": {"user": user_json(user.uid, user.display_name, len(posts))}})


# --- rendering (pure: posts in, the wire format out) ------------------------------------------------------------------


def user_json(uid: int, name: str, statuses: int) -> dict[str, Any]:
    return {
        "id": uid,
        "idstr": str(uid),
        "pc_new": 7,
        "screen_name": name,
        "profile_image_url": f"https://tvax1.sinaimg.cn/crop.0.0.180.180.50/{uid:x}ly8g.jpg",
        "profile_url": f"/u/{uid}",
        "verified": False,
        "verified_type": -1,
        "domain": "",
        "weihao": "",
        "avatar_large": f"https://tvax1.sinaimg.cn/crop.0.0.180.180.180/{uid:x}ly8g.jpg",
        "avatar_hd": f"https://tvax1.sinaimg.cn/crop.0.0.180.180.1024/{uid:x}ly8g.jpg",
        "follow_me": False,
        "following": False,
        "mbrank": 0,
        "mbtype": 0,
        "statuses_count": statuses,
        "followers_count": 1455 + uid % 100_000,
        "planet_video": False,
    }


def mblog_json(post: SimPost, statuses: int) -> dict[str, Any]:
    """One post of the ``list`` (its original nested as ``retweeted_status``)."""
    cut = post.text[:LONG_TEXT_CUT] if post.long_text else post.text
    mblog: dict[str, Any] = {
        "visible": {"type": 0, "list_id": 0},
        "created_at": rfc2822_beijing(post.created_ms),
        "id": post.mid,
        "idstr": str(post.mid),
        "mid": str(post.mid),
        "mblogid": post.bid,
        "user": user_json(post.uid, post.user_name, statuses),
        "can_edit": False,
        "textLength": len(post.text.encode("gbk")),
        "source": "iPhone客户端",
        "favorited": False,
        "text": text_html(post, MARKUP, full=False),
        "text_raw": (post.topic or "") + cut + (f"{post.emoji}" if post.emoji and not post.long_text else ""),
        "pic_ids": list(post.pictures),
        "pic_num": len(post.pictures),
        "is_paid": False,
        "mblog_vip_type": 0,
        "number_display_strategy": {
            "apply_scenario_flag": 3,
            "display_text_min_number": 1000000,
            "display_text": "100万+",
        },
        "reposts_count": post.reposts,
        "comments_count": post.comments,
        "attitudes_count": post.likes,
        "attitudes_status": 0,
        "isLongText": post.long_text,
        "mlevel": 0,
        "content_auth": 0,
        "is_show_bulletin": 2,
        "mblogtype": 0,
        "showFeedRepost": False,
        "showFeedComment": False,
        "region_name": "发布于 北京",
        "rcList": [],
    }
    if post.pictures:
        mblog["pic_infos"] = {pid: _pic_info(pid) for pid in post.pictures}
    if post.long_text:
        mblog["continue_tag"] = {"title": "全文", "pic": "", "scheme": f"sinaweibo://detail?mblogid={post.mid}"}
    if post.pinned:
        mblog.update(isTop=1, mblogtype=2, title={"text": "置顶", "base_color": 1})
    if post.retweet is not None:
        mblog["retweeted_status"] = mblog_json(post.retweet, 100)
    return mblog


def mymblog_body(shown: Sequence[SimPost], *, total: int, since_id: str | None) -> bytes:
    """A ``mymblog`` page showing ``shown`` (a pinned post first, if any); ``since_id`` None leaves the key out
    (users paged by ``page``), "" marks the last page."""
    data: dict[str, Any] = {
        "list": [mblog_json(post, total) for post in shown],
        "total": total,
        "status_visible": 0,
        "topicList": [],
    }
    if since_id is not None:
        data["since_id"] = since_id
    return json.dumps({"ok": 1, "data": data}, ensure_ascii=False, separators=(",", ":")).encode()


def make_site(context: SiteContext) -> WeiboWebSite:
    """The ``weibo_web`` source's site (the sandbox finds it by the source's name)."""
    return WeiboWebSite(context.world, context.visitors)
