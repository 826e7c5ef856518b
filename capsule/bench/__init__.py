"""capsule.bench: reproducible measurements of the kernel's BPF machinery (``capsule bench ...``).

``loops`` compares the loop mechanisms (plain bounded loops, ``bpf_loop``, ``bpf_iter_num``, ``may_goto``, a
dispatcher calling a global region): ``loop_programs`` emits the programs, ``loop_runner`` loads and runs
them, ``loop_scaling`` finds where each one stops.
"""
