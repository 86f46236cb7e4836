"""The harness's errors: a server that would not start, answer or install, all `HarnessError`s."""


class HarnessError(RuntimeError):
    """A system the tests or the benchmarks need could not be installed, started or used."""
