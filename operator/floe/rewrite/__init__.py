"""What runs inside a Spark task on an executor: a rewrite task (`task`), from reading its
files (`source`) and applying their deletes (`deletes`) to writing target-sized files
(`data_writer`, `delete_writers`) in the table's order (`layout`), and the contract its output is
checked against (`result_check`)."""
