import sys

# kio registers hypothesis strategies for its types whenever hypothesis is importable (it is,
# wherever the tests are installed); a broker never uses them, and importing hypothesis is about
# a third of the CPU a node spends before it serves.
sys.modules.setdefault("hypothesis", None)

from broker.cli import main  # noqa: E402

sys.exit(main())
