"""What is tuned: a task names an operator, its target and its schedule space, and turns a
candidate into a schedule.
"""
