import sys

from chainrule.cli import main

sys.exit(main())
