"""Imported at interpreter start by the sanitizer stage of tools/run_tests.sh (its folder is first on
PYTHONPATH): drops the editable-install import hook of torchburn, so that ``import torchburn`` finds the
staged package whose ``_C`` was built with AddressSanitizer + UndefinedBehaviorSanitizer, in this process
and in every Python subprocess the tests start."""
import sys

sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable_skbc_torchburn")]
