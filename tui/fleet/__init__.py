"""The fleet screen: the table, the detail view, the preemption timeline."""
