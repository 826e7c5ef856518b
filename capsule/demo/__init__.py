"""capsule.demo: what ``capsule demo`` shows: a bundled C program built natively and with capsule, run side by
side (``c_program``), an XDP program compiled by clang-19, loaded by capsule's own loader and run on packets
(``packet``, ``--packet``), and DOOM, a game tick and its frame per run (``doom``, ``capsule demo doom``)."""
