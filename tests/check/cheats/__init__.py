"""A corpus of cheating and honest providers for ``kw check --adversarial`` and ``kw bench``'s probes.

``corpus.py`` holds the entries the check can judge on any machine (torch-only providers on small cases of
the repository's own specs, and a few of our Triton kernels); ``gpu_corpus.py`` the ones only a GPU's
timing can catch (side streams, threads, lazy results). Every cheating entry names the checks that must
catch it; ``test_corpus.py`` measures recall and false positives over them.
"""
