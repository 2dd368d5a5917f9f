"""One logging set-up for every daemon: one line per event, the same format everywhere, text or JSON."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["configure_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(process)d] %(message)s"

_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra= fields are kept as keys."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                event[key] = value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False)


def configure_logging(level: str = "INFO", json_lines: bool = False) -> None:
    """Replace the root handlers with one stderr handler in the shared format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    try:
        root.setLevel(level.upper())
    except ValueError as exc:
        from icecrawler.errors import ConfigError

        raise ConfigError(f"unknown log level {level!r}") from exc
    for noisy in ("jieba", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
