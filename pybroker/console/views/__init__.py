"""One module per page kind; each turns the rows pybroker.console.state gathered into safe
markup (the page body).  They touch no broker state, so they may run in a worker thread."""
