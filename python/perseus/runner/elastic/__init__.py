"""perseusrun's elastic mode: launch.py starts it, driver.py runs the memberships."""
