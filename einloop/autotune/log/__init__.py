"""What was measured: tuning logs (JSON Lines), their summaries, and the deploy-time lookup of the
best record.
"""
