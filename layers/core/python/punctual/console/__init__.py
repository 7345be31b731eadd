"""The console: jobs and their recent runs as one HTML page, from the store.

One renderer serves both places a user looks: the CloudWatch dashboard's custom widget
(``functions/console``, invoked by CloudWatch with a ``widgetContext``) and local mode's
``http://127.0.0.1:8080/console``. :mod:`punctual.console.view` reads the store (read-only: a
page of jobs and a bounded slice of each job's history), :mod:`punctual.console.render` turns
what it read into HTML, and :mod:`punctual.console.widget` parses the widget's parameters.
"""
