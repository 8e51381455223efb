"""One check-result type for every "is this ready?" list: `vramkit up`'s pre-start checks
(launch/checks.py) and `vramkit host`'s host checks (core/host_plan.py); and the planner's typed reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str                 # pass | warn | fail
    reason: str                 # what was found; for a failure "what -> what to do"
    data: dict[str, Any] = field(default_factory=dict)
    code: int = 0               # the exit code a failure maps to (vramkit/errors.py Exit)

    @classmethod
    def of(cls, name: str, ok: bool, reason: str, code: int = 0, *, fatal: bool = True,
           data: dict[str, Any] | None = None) -> Check:
        """pass when ok, else fail (or warn when not `fatal`: printed, the start goes on)."""
        return cls(name, PASS if ok else (FAIL if fatal else WARN), reason, data or {}, int(code))

    @property
    def ok(self) -> bool:
        return self.status == PASS

    @property
    def fatal(self) -> bool:
        return self.status == FAIL

    @property
    def detail(self) -> str:
        return self.reason


class Reason(str):
    """Why a plan does not fit (core/plan/planner.py): the text, and `kind` (weights | tp | kv | concurrency |
    headroom | host_ram | sglang: a combination SGLang itself cannot run), so a caller can route it (`vramkit up`
    gives host RAM its own check and exit code)."""

    kind: str

    def __new__(cls, kind: str, text: str) -> Reason:
        obj = super().__new__(cls, text)
        obj.kind = kind
        return obj

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]  # copy/deepcopy/pickle (asdict copies it)
        return self.kind, str(self)
