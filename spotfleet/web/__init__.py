"""The dashboard: server-rendered pages on the controller's own port.

``routes`` serves the pages and their htmx fragments; ``session`` turns the
login cookie (or a bearer header) into a ``Principal`` (``spotfleet.api.principal``);
``fleet``, ``jobs``, ``costs``, ``events`` and ``whatif`` build each page's data
from the store, the controller and the ledger, already filtered for that
principal; ``fmt`` holds the template filters. Templates and the vendored
browser libraries (htmx, Chart.js, Swagger UI) ship in the package: nothing is
fetched from the internet at run time.
"""
