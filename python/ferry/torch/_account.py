# SPDX-License-Identifier: MIT
"""The per-batch account (ferry.torch's documentation, "Where a batch
waits"): kept when FERRY_TORCH_ACCOUNT=1 is in the environment at import.
bench/torch_loader_bench.py sets ON itself for a trainer whose workers it
starts with the variable set."""

import os

ON = os.environ.get("FERRY_TORCH_ACCOUNT", "") not in ("", "0")
