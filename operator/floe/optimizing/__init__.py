"""The optimizing processes and the engine that drives them: each table's state, its wake-ups and
maintenance schedule, a plan turned into task specs, finished tasks turned into one commit
request, the outputs no commit took removed, and the engine composed of the collaborators that
refresh, plan, commit and maintain."""
