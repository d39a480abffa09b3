DEFAULT_TIMEOUT = 60

def load_config():
    config = {}
    config["debug"] = True
    return config
