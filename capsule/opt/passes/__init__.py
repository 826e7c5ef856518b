"""The optimizer's passes, by name, in the order the default pipeline runs them.

``align`` first (it leaves the pieces it replaced dead), then ``constprop`` (folding and dead code), then the
merging passes, then the local clean-ups.
"""

from __future__ import annotations

from .align import Align
from .base import Edits, Pass
from .compact import Compact
from .constprop import ConstProp
from .copyprop import CopyProp
from .fusion import Fusion
from .peephole import Peephole
from .pktreuse import PktReuse
from .reuse import Reuse
from .superword import Superword
from .tailmerge import TailMerge

PASSES: dict[str, type[Pass]] = {
    "align": Align,
    "constprop": ConstProp,
    "superword": Superword,
    "fusion": Fusion,
    "compact": Compact,
    "peephole": Peephole,
    "reuse": Reuse,
    "pktreuse": PktReuse,
    "copyprop": CopyProp,
    "tailmerge": TailMerge,
}
DEFAULT_PASSES: tuple[str, ...] = tuple(PASSES)

__all__ = ["PASSES", "DEFAULT_PASSES", "Pass", "Edits", "Align", "ConstProp", "Superword", "Fusion", "Compact",
           "Peephole", "Reuse", "PktReuse", "CopyProp", "TailMerge"]
