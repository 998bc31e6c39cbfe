"""Ray actors of fedray: thin wrappers over :class:`fedray.client.ClientHost` and
:class:`fedray.server.Server`. No algorithm maths lives here."""
