"""The GitHub side: the issue client, comment commands, webhooks, result comments, the bot."""
