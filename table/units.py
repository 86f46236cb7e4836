"""Byte units: sizes that configuration and Hudi's plan metrics give in MiB, as bytes."""

MIB = 1024 * 1024
