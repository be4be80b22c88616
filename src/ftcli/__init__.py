"""ftcli: fine-tune transformer text classifiers on Google Vertex AI, or locally, with one command."""

__version__ = "0.1.0"
