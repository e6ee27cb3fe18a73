"""Prints requirements.lock without the packages whose names match the given patterns (fnmatch),
each with its hashes. The CPU image installs torch and torchvision from PyTorch's CPU index, so it
takes the rest of the lock without them and without the CUDA libraries the PyPI build pulls in:

    python3 .ci/lock-without.py requirements.lock 'torch' 'torchvision' 'nvidia-*' 'triton' 'cuda-*'
"""
import fnmatch
import re
import sys

lock, patterns = sys.argv[1], sys.argv[2:]
keep = True
for line in open(lock):
    start = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
    if start:
        name = start.group(1).lower().replace("_", "-")
        keep = not any(fnmatch.fnmatch(name, p) for p in patterns)
    if keep:
        sys.stdout.write(line)
