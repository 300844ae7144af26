import sys

from perseus.timeline.merge import main

sys.exit(main())
