"""Where the search looks: candidates, template knobs (``knobs``) and the space generated from a
declaration (``sketch``).
"""
