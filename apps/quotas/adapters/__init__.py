"""Outbound notifications for quota warnings (STYLE §2.3: typed, explicit timeouts)."""
