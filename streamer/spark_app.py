"""The application file for spark-submit, taking the arguments of `streamer run`:

    spark-submit --master yarn "$(python -c 'import streamer.spark_app as m; print(m.__file__)')" \\
        configs/ [--once]
"""

from __future__ import annotations

import sys

from streamer.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
