"""Structured (JSON lines) logging for every headroom process.

Fields passed with ``extra=`` become JSON keys. Anything that looks like a credential
(keys containing token/secret/password/authorization) is redacted before it is written.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_SECRET_WORDS = ("token", "secret", "password", "authorization", "dsn")


def _redact(key: str, value: object) -> object:
    return "[redacted]" if any(w in key.lower() for w in _SECRET_WORDS) else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}
        fields = extra.pop("fields", None)  # extra={"fields": {...}} is accepted too
        if isinstance(fields, dict):
            extra.update(fields)
        for key, value in extra.items():
            out[key] = _redact(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str | int = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # one line per HTTP request from the clients would drown everything else
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
