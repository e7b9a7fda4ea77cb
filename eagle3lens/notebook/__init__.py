"""The walkthroughs' three sides: the kernel module the notebooks import, the headless runner, the ipywidgets controls."""
