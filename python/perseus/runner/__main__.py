import sys

from perseus.runner.launch import main

sys.exit(main())
