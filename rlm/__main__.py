import sys

from rlm.cli.main import main

sys.exit(main())
