"""The driver side of an optimizing process: a plan turned into task specs, finished tasks
turned into one commit request, and the outputs no commit took removed."""
