import sys

from hostagent.rdma.agent import main

sys.exit(main())
