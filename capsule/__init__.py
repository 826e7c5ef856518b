"""capsule: large programs inside the Linux kernel as eBPF."""


def attach(*args, **kw):  # type: ignore[no-untyped-def]
    """Attach a packet handler or Lua script to an XDP or tc hook for a ``with`` block: see
    ``capsule.hooks.attach.attach`` (imported on first use: ``import capsule`` stays light)."""
    from capsule.hooks.attach import attach as _attach

    return _attach(*args, **kw)
