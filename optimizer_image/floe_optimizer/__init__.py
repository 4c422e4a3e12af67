"""floe's optimizer: a long-running PySpark application that takes rewrite tasks from the task
service, runs each as a Spark job and reports the files it wrote. One runs per OptimizerGroup.
"""
