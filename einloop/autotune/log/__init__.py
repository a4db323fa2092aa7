"""What was measured: tuning logs (JSON Lines), the record database every query of them goes
through, their summaries, and the deploy-time lookup of the best record."""
