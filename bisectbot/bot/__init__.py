"""The GitHub bot: comment commands in (polling or webhooks), one job at a time, results posted in place."""
