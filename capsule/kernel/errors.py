"""Exceptions raised by the kernel layer.

Every failed bpf(2) call becomes a ``BPFError``: an ``OSError`` (so ``errno`` checks keep working) that also
names the bpf command and says in words what was being attempted. A program the verifier rejects becomes a
``VerifierError``, which carries the verifier log and pulls out the two facts a reader wants first: which
instruction was rejected and why.
"""

from __future__ import annotations

import errno as _errno
import os
import re

from .consts import Cmd

# "12: (61) r1 = *(u32 *)(r2 +0)" (the verifier prints each instruction it checks as "idx: (opcode) text")
_INSN_LINE = re.compile(r"^(\d+): \(([0-9a-f]{2})\) (.*)$")
# log level 2 appends the resulting register state: "0: (b7) r0 = 0        ; R0_w=0"
_STATE_COMMENT = re.compile(r"\s+;.*$")
# state-only lines ("12: R1=ctx() R10=fp0") and "from 3 to 7:" lines are context, not the reason
_STATE_LINE = re.compile(r"^(\d+:|from \d+ to \d+:)\s*(R\d+|frame\d+|$)")
_NOISE = (
    "processed ",
    "verification time ",
    "stack depth ",
    "-- END PROG LOAD LOG --",
    "func#",
    "mark_precise:",
    "last_idx ",
    "regs=",
    "parent ",
)


class BPFError(OSError):
    """A bpf(2) command failed. ``errno``, ``cmd`` (a ``Cmd``) and ``message`` say which and why."""

    def __init__(self, err: int, cmd: Cmd | int, message: str = "") -> None:
        super().__init__(err, os.strerror(err))
        try:
            self.cmd: Cmd | int = Cmd(cmd)
        except ValueError:
            self.cmd = cmd
        self.message = message

    def _head(self) -> str:
        name = self.cmd.name if isinstance(self.cmd, Cmd) else str(self.cmd)
        code = _errno.errorcode.get(self.errno or 0, str(self.errno))
        what = f": {self.message}" if self.message else ""
        return f"bpf({name}) failed with {code} ({self.strerror}){what}"

    def __str__(self) -> str:
        return self._head()


class LoadError(Exception):
    """An object could not be loaded for a reason found before (or instead of) the kernel's verdict."""


class BTFLoadError(BPFError):
    """BPF_BTF_LOAD rejected a BTF blob; ``log`` is the kernel's BTF verifier log."""

    def __init__(self, err: int, message: str, log: str) -> None:
        super().__init__(err, Cmd.BTF_LOAD, message)
        self.log = log

    def __str__(self) -> str:
        tail = "\n".join(self.log.strip().splitlines()[-8:])
        return self._head() + (f"\nBTF log (tail):\n{tail}" if tail else "")


class VerifierError(BPFError):
    """The verifier refused a program.

    ``log`` is the whole verifier log, ``reason`` its last meaningful line (the verifier's complaint),
    ``insn_index`` the slot index of the last instruction the verifier printed before giving up (None when the
    log names none, e.g. errors found before the walk such as an unknown helper), ``insn_text`` that
    instruction as the verifier printed it.
    """

    def __init__(self, err: int, message: str, log: str) -> None:
        super().__init__(err, Cmd.PROG_LOAD, message)
        self.log = log
        self.insn_index, self.insn_text, self.reason = parse_failure(log)
        self.program: str | None = None  # the program's name, when a collection was loading several

    def __str__(self) -> str:
        parts = [self._head()]
        if self.insn_index is not None:
            parts.append(f"  at insn {self.insn_index}: {self.insn_text}")
        if self.reason:
            parts.append(f"  reason: {self.reason}")
        if not self.log.strip():
            parts.append("  (empty verifier log)")
        return "\n".join(parts)


def _meaningful(line: str) -> bool:
    s = line.strip()
    if not s or s.startswith(_NOISE):
        return False
    if _INSN_LINE.match(s) or _STATE_LINE.match(s):
        return False
    return True


def parse_failure(log: str) -> tuple[int | None, str | None, str | None]:
    """From a failed verifier log, find (insn_index, insn_text, reason).

    The verifier prints each instruction as it walks it and, on failure, one or more lines of complaint, then
    the stats line. The reason is the last line that is neither an instruction, a register-state dump nor a
    stats line; the failing instruction is the last instruction line printed before that reason.
    """
    lines = log.splitlines()
    reason_at = None
    for i in range(len(lines) - 1, -1, -1):
        if _meaningful(lines[i]):
            reason_at = i
            break
    reason = lines[reason_at].strip() if reason_at is not None else None
    stop = reason_at if reason_at is not None else len(lines)
    for i in range(stop - 1, -1, -1):
        m = _INSN_LINE.match(lines[i].strip())
        if m:
            text = _STATE_COMMENT.sub("", m.group(3))
            return int(m.group(1)), f"({m.group(2)}) {text}", reason
    return None, None, reason
