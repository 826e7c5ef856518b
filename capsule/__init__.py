"""capsule: large programs inside the Linux kernel as eBPF."""
