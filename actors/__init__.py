"""Ray actors of fedray: thin wrappers over :class:`fedray.runtime.host.ClientHost` and
:class:`fedray.loop.server.Server`. No algorithm maths lives here."""
