"""The application file for spark-submit, taking the arguments of `streamer run`:

    spark-submit --master yarn "$(python -c 'import streamer.spark_app as m; print(m.__file__)')" \\
        configs/ [--once]
"""

import os
import sys

# Python puts a script's own directory first on the path; the package's modules must not shadow
# top-level ones there.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from streamer.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
