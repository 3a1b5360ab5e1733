"""Downloading a checkpoint from the hub: what the hub lists (`hub_files`), the resumable
transfer (`transfer`) and the download folder's record of what it wrote (`record`)."""
