"""`python -m streamer.cli`: the same command line as the `streamer` script."""

import sys

from streamer.cli.main import main

sys.exit(main())
