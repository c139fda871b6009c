"""The frontend's HTTP routes, one module per concern. Each reads the app's ``Frontend``
(``request.app.state.frontend``) and goes through its engine's read API."""
