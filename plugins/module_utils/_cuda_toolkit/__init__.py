# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The CUDA toolkit on a host in one Python owner (issue 39), used by the module gpuserve.sglang.cuda_toolkit.

One concern per file:

- ``repo``: what is computed without the host - NVIDIA's repository per distribution and architecture, the sources
  refused, the nvcc and loader-entry parsers, the text of the files written (pure functions);
- (``module_utils/_packages.py``, shared with the install module: system packages and pip requirements, asked
  before anything is installed);
- ``host``: the writes (a directory, a file, a link), each compared first, reported as one sentence;
- ``toolkit``: the run - preflight (reads and refusals), install, configure, verify - with every collaborator that
  touches the host beyond the filesystem injected.

No Ansible import here: the module file builds the collaborators and calls ``toolkit.CudaToolkit``.
"""
