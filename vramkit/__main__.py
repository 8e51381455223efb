import sys

from vramkit.cli import main

sys.exit(main())
