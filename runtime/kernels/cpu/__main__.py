import sys

from .library import main

sys.exit(main())
