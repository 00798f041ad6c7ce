import sys

from deltachip.cli import main

sys.exit(main())
