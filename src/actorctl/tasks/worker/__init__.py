"""The worker actor and what follows a run: documents, follow-ups, hooks, control and inspection."""
