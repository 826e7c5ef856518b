-- The SQLite shell test's script, before the orders: the schema and the customers (test_sqlite.py adds the
-- 10,000 orders in one transaction, then queries.sql).
.headers on
CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, joined TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customer(id), item TEXT NOT NULL,
                    qty INTEGER NOT NULL, price REAL NOT NULL);
INSERT INTO customer(name, city, joined) VALUES
  ('Ada', 'London', '2019-03-01'), ('Grace', 'New York', '2020-11-23'), ('Alan', 'Manchester', '2018-06-23'),
  ('Edsger', 'Amsterdam', '2021-01-15'), ('Barbara', 'Boston', '2017-05-02'), ('Donald', 'Stanford', '2016-01-10'),
  ('Margaret', 'Boston', '2022-07-20'), ('Niklaus', 'Zurich', '2015-02-14'), ('Frances', 'New York', '2019-09-09'),
  ('Ken', 'Berkeley', '2020-04-04'), ('Dennis', 'Berkeley', '2020-04-05'), ('Radia', 'Boston', '2023-03-03'),
  ('Tony', 'Oxford', '2018-08-08'), ('Leslie', 'New York', '2021-12-12'), ('Annie', 'Manchester', '2022-02-22'),
  ('Nobody', 'Nowhere', NULL);
