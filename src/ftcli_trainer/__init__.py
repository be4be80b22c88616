"""ftcli's trainer: fine-tunes a transformer text classifier; runs inside Vertex AI or locally.

It never imports `ftcli`: it is uploaded to Vertex alone, as its own sdist.
"""

__version__ = "0.1.0"
