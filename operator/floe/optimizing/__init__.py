"""The optimizing processes and the engine that drives them: each table's state, its wake-ups and
maintenance schedule, planning, and the commit of what a group's executors wrote."""
