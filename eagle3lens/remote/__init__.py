"""Remote walkthrough runs over SSH: the run orchestration, the SSH layer, file transfer, and the two programs shipped to the host."""
