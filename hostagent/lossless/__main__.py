import sys

from hostagent.lossless import main

sys.exit(main())
