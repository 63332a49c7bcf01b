"""``python -m kernelworks`` is the ``kw`` command."""

from kernelworks.cli.main import main

raise SystemExit(main())
