"""Where the Hudi-written sample tables are: `../shared/reference/hudi-samples` beside the clone.

They are required: the format tests compare against them, so a missing copy is an error, not
a reason to skip.
"""

from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "hudi-samples"
if not SAMPLES.is_dir():
    raise RuntimeError(f"the Hudi sample tables are required by the tests and were not found at {SAMPLES}")
